//! The extended QP: `ibv_create_qp_ex` (the context's `create_qp_ex` op),
//! `ibv_qp_to_qp_ex`, and the `ibv_wr_*` posting API, whose functions C
//! calls through pointers in `struct ibv_qp_ex`.
//!
//! `ibv_wr_start` opens a batch; each `ibv_wr_<opcode>` starts a WR with the
//! `wr_id` and `wr_flags` C has just written into the `ibv_qp_ex`;
//! `ibv_wr_set_sge*` / `ibv_wr_set_inline_data*` / `ibv_wr_set_ud_addr` fill
//! it in; `ibv_wr_complete` posts the batch through the provider and
//! answers the errno of the first failure (none of the batch is posted past
//! it), and `ibv_wr_abort` drops it. The builder functions have no error
//! channel of their own: a misuse (a setter with no WR started, too much
//! inline data) is kept and reported by `ibv_wr_complete`, as mlx5 does.

#![allow(unsafe_code)]
// The exports are reached from C by their symbols, not from Rust.
#![allow(unreachable_pub)]

use core::ffi::{c_int, c_void};

use doorbell_types::{Mkey, Qpn};
use doorbell_verbs::{RemoteAddr, SendBatch, SendFlags, Sge, UdTarget, WrOpcode};
use libc::{EINVAL, EOPNOTSUPP, size_t};

use crate::abi::*;
use crate::boundary::{Conv, guard};
use crate::ctx::context;
use crate::handles;
use crate::qp::{CQp, NewQp, create_qp, qp_of};
use crate::wr_batch::{WrState, inline_pieces, sge_of};

/// `IBV_QP_INIT_ATTR_PD`, `_CREATE_FLAGS`, `_SEND_OPS_FLAGS`.
const ATTR_PD: u32 = 1 << 0;
const ATTR_CREATE_FLAGS: u32 = 1 << 2;
const ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
/// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`.
const CREATE_BLOCK_SELF_MCAST_LB: u32 = 1 << 1;
/// The `IBV_QP_EX_WITH_*` ops doorbell has: RDMA WRITE (and with
/// immediate), SEND (and with immediate), RDMA READ, both atomics.
const SUPPORTED_SEND_OPS: u64 = 0x7f;

/// Sets the `ibv_wr_*` pointers of a new extended QP.
fn fill_ops(qp: &mut ibv_qp_ex) {
    qp.wr_start = Some(wr_start);
    qp.wr_complete = Some(wr_complete);
    qp.wr_abort = Some(wr_abort);
    qp.wr_rdma_write = Some(wr_rdma_write);
    qp.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    qp.wr_rdma_read = Some(wr_rdma_read);
    qp.wr_send = Some(wr_send);
    qp.wr_send_imm = Some(wr_send_imm);
    qp.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    qp.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    qp.wr_set_sge = Some(wr_set_sge);
    qp.wr_set_sge_list = Some(wr_set_sge_list);
    qp.wr_set_inline_data = Some(wr_set_inline_data);
    qp.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    qp.wr_set_ud_addr = Some(wr_set_ud_addr);
}

/// `verbs_context.create_qp_ex`.
pub(crate) unsafe extern "C" fn create_qp_ex(
    context_: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    guard("ibv_create_qp_ex", Conv::Null, || {
        context(context_)?;
        if attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: checked non-NULL; the caller passes an ibv_qp_init_attr_ex.
        let a = unsafe { &mut *attr };
        if a.comp_mask & ATTR_PD == 0 {
            return Err(EINVAL);
        }
        // Of the create flags only "block self multicast loopback" is
        // honoured, trivially: doorbell has no multicast to loop back.
        if a.comp_mask & !(ATTR_PD | ATTR_CREATE_FLAGS | ATTR_SEND_OPS_FLAGS) != 0
            || (a.comp_mask & ATTR_CREATE_FLAGS != 0
                && a.create_flags & !CREATE_BLOCK_SELF_MCAST_LB != 0)
        {
            return Err(EOPNOTSUPP);
        }
        let send_ops = (a.comp_mask & ATTR_SEND_OPS_FLAGS != 0).then_some(a.send_ops_flags);
        if send_ops.is_some_and(|f| f & !SUPPORTED_SEND_OPS != 0) {
            return Err(EOPNOTSUPP);
        }
        // The plain attributes are the first fields of the extended ones.
        let mut plain = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        let qp = create_qp(NewQp {
            pd: a.pd,
            attr: &mut plain,
            send_ops,
        })?;
        a.cap = plain.cap;
        if send_ops.is_some() {
            let q = qp_of(qp)?;
            // SAFETY: the QP was made just now and its handle not yet
            // returned: nothing else reads or writes its ibv_qp_ex.
            fill_ops(unsafe { &mut *q.qp.get() });
        }
        Ok(qp)
    })
}

/// `ibv_qp_to_qp_ex`: the extended QP of one made with send ops.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    guard("ibv_qp_to_qp_ex", Conv::Null, || {
        if let Some(r) = crate::hosted::verbs::qp_to_qp_ex(qp) {
            return r;
        }
        let q = qp_of(qp)?;
        if !q.ex {
            return Err(EOPNOTSUPP);
        }
        Ok(q.qp.get())
    })
}

/// The QP behind the extended QP `qpx` (whose first field is its `ibv_qp`).
fn qpx_of<'a>(qpx: *mut ibv_qp_ex) -> Result<&'a CQp, c_int> {
    handles::get::<CQp>(qpx.cast::<ibv_qp>())
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on the `ibv_wr_*` state of `qpx`; a QP that is not one of
/// ours is ignored (these calls have no error channel).
fn with_batch(name: &str, qpx: *mut ibv_qp_ex, f: impl FnOnce(&CQp, &mut WrState)) {
    guard(name, Conv::Abort, || {
        if let Ok(q) = qpx_of(qpx) {
            f(q, &mut lock(&q.wr));
        }
        Ok(())
    });
}

fn fail(b: &mut WrState, errno: c_int) {
    b.error.get_or_insert(errno);
}

/// Starts a WR of opcode `op` with the `wr_id`/`wr_flags` C just set.
fn begin(name: &str, qpx: *mut ibv_qp_ex, op: WrOpcode) {
    with_batch(name, qpx, |q, b| {
        if !b.open {
            return fail(b, EINVAL);
        }
        // SAFETY: the QP is live; C wrote these fields just before the call.
        let (wr_id, flags) = unsafe {
            let x = q.qp.get();
            ((*x).wr_id, (*x).wr_flags)
        };
        b.batch.begin(wr_id, SendFlags(flags & 0xf), op);
    });
}

/// Runs `f` on the batch, whose last WR it fills in; a failure is kept for
/// `ibv_wr_complete`.
fn current(
    name: &str,
    qpx: *mut ibv_qp_ex,
    f: impl FnOnce(&CQp, &mut SendBatch) -> Result<(), c_int>,
) {
    with_batch(name, qpx, |q, b| {
        if b.batch.is_empty() {
            return fail(b, EINVAL);
        }
        if let Err(e) = f(q, &mut b.batch) {
            fail(b, e);
        }
    });
}

fn remote(rkey: u32, addr: u64) -> RemoteAddr {
    RemoteAddr {
        addr,
        rkey: Mkey::from_raw(rkey),
    }
}

unsafe extern "C" fn wr_start(qpx: *mut ibv_qp_ex) {
    with_batch("ibv_wr_start", qpx, |_, b| b.restart(true));
}

unsafe extern "C" fn wr_abort(qpx: *mut ibv_qp_ex) {
    with_batch("ibv_wr_abort", qpx, |_, b| b.restart(false));
}

unsafe extern "C" fn wr_complete(qpx: *mut ibv_qp_ex) -> c_int {
    guard("ibv_wr_complete", Conv::Errno, || {
        let q = qpx_of(qpx)?;
        let mut b = lock(&q.wr);
        let posted = match (b.open, b.error) {
            (false, _) => Err(EINVAL),
            (true, Some(e)) => Err(e),
            (true, None) => q.inner.post_batch(&b.batch).map_err(|e| e.error.errno()),
        };
        b.restart(false);
        posted.map(|()| 0)
    })
}

unsafe extern "C" fn wr_rdma_write(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    begin(
        "ibv_wr_rdma_write",
        qpx,
        WrOpcode::RdmaWrite(remote(rkey, remote_addr)),
    );
}

unsafe extern "C" fn wr_rdma_write_imm(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm: u32) {
    begin(
        "ibv_wr_rdma_write_imm",
        qpx,
        WrOpcode::RdmaWriteWithImm(remote(rkey, remote_addr), u32::from_be(imm)),
    );
}

unsafe extern "C" fn wr_rdma_read(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    begin(
        "ibv_wr_rdma_read",
        qpx,
        WrOpcode::RdmaRead(remote(rkey, remote_addr)),
    );
}

unsafe extern "C" fn wr_send(qpx: *mut ibv_qp_ex) {
    begin("ibv_wr_send", qpx, WrOpcode::Send);
}

unsafe extern "C" fn wr_send_imm(qpx: *mut ibv_qp_ex, imm: u32) {
    begin(
        "ibv_wr_send_imm",
        qpx,
        WrOpcode::SendWithImm(u32::from_be(imm)),
    );
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    begin(
        "ibv_wr_atomic_cmp_swp",
        qpx,
        WrOpcode::AtomicCmpSwp {
            remote: remote(rkey, remote_addr),
            compare,
            swap,
        },
    );
}

unsafe extern "C" fn wr_atomic_fetch_add(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    begin(
        "ibv_wr_atomic_fetch_add",
        qpx,
        WrOpcode::AtomicFetchAdd {
            remote: remote(rkey, remote_addr),
            add,
        },
    );
}

unsafe extern "C" fn wr_set_sge(qpx: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    current("ibv_wr_set_sge", qpx, |_, b| {
        b.set_sge(Sge {
            addr,
            length,
            lkey: Mkey::from_raw(lkey),
        })
        .map_err(|e| e.errno())
    });
}

unsafe extern "C" fn wr_set_sge_list(
    qpx: *mut ibv_qp_ex,
    num_sge: size_t,
    sg_list: *const ibv_sge,
) {
    current("ibv_wr_set_sge_list", qpx, |_, b| {
        if num_sge > 0 && sg_list.is_null() {
            return Err(EINVAL);
        }
        let list: &[ibv_sge] = if num_sge == 0 {
            &[]
        } else {
            // SAFETY: the caller's array holds num_sge SGEs (non-NULL).
            unsafe { core::slice::from_raw_parts(sg_list, num_sge) }
        };
        b.set_sge_list(list.iter().map(sge_of))
            .map_err(|e| e.errno())
    });
}

/// Copies C's inline pieces into the WR being built; ENOMEM past the QP's
/// inline room, checked before anything is read, as mlx5 does.
fn set_inline(name: &str, qpx: *mut ibv_qp_ex, pieces: impl Iterator<Item = (u64, usize)> + Clone) {
    current(name, qpx, |q, b| {
        let max = q.inner.caps().max_inline_data;
        // SAFETY: ibv_wr_set_inline_data* read the caller's buffers now;
        // the batch keeps a copy.
        let pieces = unsafe { inline_pieces(pieces, max) }?;
        b.set_inline_data_list(pieces).map_err(|e| e.errno())
    });
}

unsafe extern "C" fn wr_set_inline_data(qpx: *mut ibv_qp_ex, addr: *mut c_void, length: size_t) {
    set_inline(
        "ibv_wr_set_inline_data",
        qpx,
        core::iter::once((addr as u64, length)),
    );
}

unsafe extern "C" fn wr_set_inline_data_list(
    qpx: *mut ibv_qp_ex,
    num_buf: size_t,
    buf_list: *const ibv_data_buf,
) {
    if num_buf > 0 && buf_list.is_null() {
        return with_batch("ibv_wr_set_inline_data_list", qpx, |_, b| fail(b, EINVAL));
    }
    let bufs: &[ibv_data_buf] = if num_buf == 0 {
        &[]
    } else {
        // SAFETY: the caller's array holds num_buf buffers (non-NULL).
        unsafe { core::slice::from_raw_parts(buf_list, num_buf) }
    };
    set_inline(
        "ibv_wr_set_inline_data_list",
        qpx,
        bufs.iter().map(|b| (b.addr as u64, b.length)),
    );
}

unsafe extern "C" fn wr_set_ud_addr(
    qpx: *mut ibv_qp_ex,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    current("ibv_wr_set_ud_addr", qpx, |_, b| {
        let ah = crate::qp::ah_of(ah)?;
        b.set_ud_addr(UdTarget {
            ah,
            remote_qpn: Qpn::new(remote_qpn),
            remote_qkey,
        })
        .map_err(|e| e.errno())
    });
}
