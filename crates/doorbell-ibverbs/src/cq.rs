//! Completion channels (real eventfds) and CQs, with the CQ entries of the
//! context's op table (`poll_cq`, `req_notify_cq`).

#![allow(unsafe_code)]
// The exports are reached from C by their symbols, not from Rust.
#![allow(unreachable_pub)]

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_uint, c_void};
use std::sync::{Condvar, Mutex};

use doorbell_verbs::{Cq, Pd, Wc};
use libc::{EINVAL, ENOENT};

use crate::abi::consts::*;
use crate::abi::*;
use crate::boundary::{Conv, guard};
use crate::channel::CChannel;
use crate::ctx::context;
use crate::events::{self, Queue, ROUTER};
use crate::handle;
use crate::handles;

/// `ibv_create_comp_channel`: its fd is a real eventfd, readable while
/// events wait.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_create_comp_channel(context_: *mut ibv_context) -> *mut ibv_comp_channel {
    guard("ibv_create_comp_channel", Conv::Null, || {
        crate::route::any_context(context_)?;
        let queue = Queue::new()?;
        let ch = ibv_comp_channel {
            context: context_,
            fd: queue.fd.raw(),
            refcnt: 0,
        };
        Ok(handles::register(Box::new(CChannel {
            ch: UnsafeCell::new(ch),
            queue,
        })))
    })
}

/// `ibv_destroy_comp_channel`: EBUSY while a CQ uses it.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    guard("ibv_destroy_comp_channel", Conv::Errno, || {
        let obj = handles::take::<CChannel>(channel)?;
        if obj.get().refcnt > 0 {
            handles::restore(obj);
            return Err(libc::EBUSY);
        }
        drop(obj);
        Ok(0)
    })
}

#[repr(C)]
pub(crate) struct CCq {
    /// C reads it (as `ibv_cq`, its first part, or whole, for a CQ made by
    /// `ibv_create_cq_ex`); this library counts acknowledged events in it
    /// and sets the current completion's `status` and `wr_id`.
    cq: UnsafeCell<ibv_cq_ex>,
    pub(crate) inner: Cq,
    /// The completion `ibv_start_poll`/`ibv_next_poll` stepped to.
    current: Mutex<Wc>,
    /// Completion events delivered and not yet acknowledged.
    unacked: Mutex<u32>,
    /// Signalled as events are acknowledged (`ibv_destroy_cq` waits).
    acked: Condvar,
    /// The parent domain it was made in (`IBV_CQ_INIT_ATTR_MASK_PD`), held
    /// so that `ibv_dealloc_pd` answers EBUSY while the CQ exists.
    _parent: Option<Pd>,
}
handle!(CCq, ibv_cq, cq, Cq);

/// `ibv_create_cq`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_create_cq(
    context_: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    guard("ibv_create_cq", Conv::Null, || {
        if let Some(r) =
            crate::hosted::verbs::create_cq(context_, cqe, cq_context, channel, comp_vector)
        {
            return r;
        }
        if cqe < 1 || comp_vector < 0 {
            return Err(EINVAL);
        }
        create(
            context_,
            cqe as u32,
            cq_context,
            channel,
            comp_vector as u32,
            None,
            |_| {},
        )
    })
}

/// Makes a CQ whose C struct `ops` completes (the extended CQ's polling
/// functions) before it is handed out.
pub(crate) fn create(
    context_: *mut ibv_context,
    cqe: u32,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: u32,
    parent: Option<Pd>,
    ops: impl FnOnce(&mut ibv_cq_ex),
) -> Result<*mut ibv_cq, c_int> {
    let c = context(context_)?;
    if comp_vector != 0 {
        return Err(EINVAL);
    }
    let ch = if channel.is_null() {
        None
    } else {
        Some(handles::get::<CChannel>(channel)?)
    };
    let inner = c.ctx.create_cq(cqe).map_err(|e| e.errno())?;
    // SAFETY: ibv_cq_ex is pointers, integers, pthread objects whose
    // all-zero value is their static initializer on glibc, and optional
    // function pointers (None when zero).
    let mut cq: ibv_cq_ex = unsafe { core::mem::zeroed() };
    cq.context = context_;
    cq.channel = channel;
    cq.cq_context = cq_context;
    cq.handle = inner.cqn().get();
    // One CQE stays free: mlx5 reports 2^n - 1 of 2^n, as capacity() does.
    cq.cqe = inner.capacity() as c_int;
    ops(&mut cq);
    let cqn = inner.cqn();
    let h = handles::register(Box::new(CCq {
        cq: UnsafeCell::new(cq),
        inner,
        current: Mutex::new(Wc::default()),
        unacked: Mutex::new(0),
        acked: Condvar::new(),
        _parent: parent,
    }));
    if let Some(ch) = ch {
        ch.add_cq(1);
    }
    events::lock(&ROUTER)
        .cqs
        .insert(cqn, (h as usize, channel as usize, context_ as usize));
    Ok(h)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `ibv_destroy_cq`: EBUSY while a QP uses it.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    guard("ibv_destroy_cq", Conv::Errno, || {
        if let Some(r) = crate::hosted::verbs::destroy_cq(cq) {
            return r;
        }
        let obj = handles::get::<CCq>(cq)?;
        if obj.inner.is_shared() {
            return Err(libc::EBUSY);
        }
        let cq_c = obj.c();
        events::lock(&ROUTER).cqs.remove(&obj.inner.cqn());
        if !cq_c.channel.is_null()
            && let Ok(ch) = handles::get::<CChannel>(cq_c.channel)
        {
            // Events of the CQ not yet taken go with it.
            ch.queue.remove(|&h| h == cq as usize);
            ch.add_cq(-1);
        }
        // As ibv_destroy_cq: wait until every event taken is acknowledged
        // (the handle stays valid meanwhile, so ibv_ack_cq_events finds it).
        let mut u = lock(&obj.unacked);
        while *u > 0 {
            u = obj.acked.wait(u).unwrap_or_else(|e| e.into_inner());
        }
        drop(u);
        drop(handles::take::<CCq>(cq)?);
        Ok(0)
    })
}

impl CCq {
    fn c(&self) -> ibv_cq {
        // SAFETY: a copy of the `ibv_cq` that begins the cell's `ibv_cq_ex`
        // (plain data: pointers, integers, and pthread objects that are
        // never used by value).
        unsafe { self.cq.get().cast::<ibv_cq>().read() }
    }

    /// Polls one completion into `current` and the C struct's `status`
    /// and `wr_id`; ENOENT if there is none.
    pub(crate) fn step(&self) -> Result<(), c_int> {
        let mut w = [Wc::default()];
        if self.inner.poll(&mut w).map_err(|e| e.errno())? == 0 {
            return Err(ENOENT);
        }
        // SAFETY: the cell's own pointer; C reads these two fields only
        // between its poll calls, on the thread that polls.
        unsafe {
            let p = self.cq.get();
            (*p).status = w[0].status as c_uint;
            (*p).wr_id = w[0].wr_id;
        }
        *lock(&self.current) = w[0];
        Ok(())
    }

    /// The completion the last step took.
    pub(crate) fn current(&self) -> Wc {
        *lock(&self.current)
    }
}

pub(crate) fn wc_flags(w: &Wc) -> c_uint {
    (if w.grh { IBV_WC_GRH } else { 0 })
        | (if w.imm_data.is_some() {
            IBV_WC_WITH_IMM
        } else {
            0
        })
}

fn to_c_wc(w: &Wc) -> ibv_wc {
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status as c_uint,
        opcode: w.opcode as c_uint,
        vendor_err: u32::from(w.vendor_err),
        byte_len: w.byte_len,
        // C holds immediate data in network order.
        imm_data: w.imm_data.unwrap_or(0).to_be(),
        qp_num: w.qp_num.get(),
        src_qp: w.src_qp,
        wc_flags: wc_flags(w),
        pkey_index: 0,
        slid: 0,
        sl: w.sl,
        dlid_path_bits: 0,
    }
}

/// `ops.poll_cq`.
unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    guard("ibv_poll_cq", Conv::MinusOne, || {
        let c = handles::get::<CCq>(cq)?;
        if num_entries < 0 || (num_entries > 0 && wc.is_null()) {
            return Err(EINVAL);
        }
        let mut buf = [Wc::default(); 16];
        let mut done = 0usize;
        while done < num_entries as usize {
            let want = (num_entries as usize - done).min(buf.len());
            let n = c.inner.poll(&mut buf[..want]).map_err(|e| e.errno())?;
            for (i, w) in buf[..n].iter().enumerate() {
                // SAFETY: the caller's array has num_entries entries;
                // done + i < num_entries.
                unsafe { wc.add(done + i).write(to_c_wc(w)) };
            }
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done as c_int)
    })
}

/// `ops.req_notify_cq`.
unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    guard("ibv_req_notify_cq", Conv::Errno, || {
        let c = handles::get::<CCq>(cq)?;
        c.inner
            .req_notify(solicited_only != 0)
            .map_err(|e| e.errno())?;
        Ok(0)
    })
}

/// The completion-queue entries of the context's op table.
pub(crate) struct CqOps {
    pub(crate) poll_cq: PollCqFn,
    pub(crate) req_notify_cq: unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int,
}

/// The CQ ops every context gets.
pub(crate) const CQ_OPS: CqOps = CqOps {
    poll_cq,
    req_notify_cq,
};

/// `ibv_get_cq_event`: waits for the next completion event of a CQ on
/// `channel`; EAGAIN at once if the channel's fd is non-blocking and none
/// is there.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    guard("ibv_get_cq_event", Conv::MinusOne, || {
        let ch = handles::get::<CChannel>(channel)?;
        if cq.is_null() || cq_context.is_null() {
            return Err(EINVAL);
        }
        loop {
            let h = ch.queue.pop()? as *mut ibv_cq;
            if let Some(cqc) = crate::hosted::verbs::cq_event_taken(h) {
                // SAFETY: both checked non-NULL.
                unsafe {
                    cq.write(h);
                    cq_context.write(cqc);
                }
                return Ok(0);
            }
            // A CQ destroyed meanwhile took its events with it; skip any left.
            let Ok(obj) = handles::get::<CCq>(h) else {
                continue;
            };
            *lock(&obj.unacked) += 1;
            // SAFETY: both checked non-NULL.
            unsafe {
                cq.write(h);
                cq_context.write(obj.c().cq_context);
            }
            return Ok(0);
        }
    })
}

/// `ibv_ack_cq_events`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    guard("ibv_ack_cq_events", Conv::Abort, || {
        if crate::hosted::verbs::ack_cq_events(cq, nevents).is_some() {
            return Ok(());
        }
        if let Ok(c) = handles::get::<CCq>(cq) {
            let mut u = lock(&c.unacked);
            let n = nevents.min(*u);
            *u -= n;
            c.acked.notify_all();
            for _ in 0..n {
                c.inner.ack_event();
            }
            // SAFETY: the cell's own pointer; C only reads this counter.
            unsafe {
                let p = c.cq.get();
                (*p).comp_events_completed = (*p).comp_events_completed.wrapping_add(n);
            }
        }
        Ok(())
    })
}

/// `ibv_resize_cq`: the CQ keeps its unpolled completions; `cqe` reads back
/// the new size.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    guard("ibv_resize_cq", Conv::Errno, || {
        let c = handles::get::<CCq>(cq)?;
        if cqe < 1 {
            return Err(EINVAL);
        }
        c.inner.resize(cqe as u32).map_err(|e| e.errno())?;
        // SAFETY: the cell's own pointer; C only reads `cqe`.
        unsafe { (*c.cq.get()).cqe = c.inner.capacity() as c_int };
        Ok(0)
    })
}
