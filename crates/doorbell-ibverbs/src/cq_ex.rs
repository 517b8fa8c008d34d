//! The extended CQ (`ibv_create_cq_ex`): completions read one at a time
//! through the `ibv_cq_ex` op pointers that the inline `ibv_start_poll`,
//! `ibv_next_poll`, `ibv_end_poll` and `ibv_wc_read_*` call. The CQ is the
//! same object as one `ibv_create_cq` makes (`ibv_cq_ex_to_cq` is a cast),
//! so `ibv_poll_cq`, events and `ibv_destroy_cq` work on it too.

#![allow(unsafe_code)]

use core::ffi::{c_int, c_uint};

use doorbell_verbs::Wc;
use libc::{EINVAL, EOPNOTSUPP};

use crate::abi::consts::*;
use crate::abi::*;
use crate::boundary::{Conv, guard};
use crate::cq::{CCq, create, wc_flags};
use crate::handles;
use crate::pd::pd_of;

/// What `ibv_create_cq_ex` offers beyond `ibv_create_cq`: the standard
/// completion fields, the device's completion timestamp and its wall-clock
/// time (where the device has a wall clock: the live NIC does), and the
/// single-threaded hint, which changes nothing here. VLANs, flow tags and
/// tag matching are EOPNOTSUPP.
/// A parent domain (`IBV_CQ_INIT_ATTR_MASK_PD`) of this context is held
/// while the CQ exists; a PD that is not one is refused (EINVAL), as mlx5
/// refuses it. Its allocator is not asked for the CQ's buffer.
pub(crate) unsafe extern "C" fn create_cq_ex(
    context_: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    guard("ibv_create_cq_ex", Conv::Null, || {
        // SAFETY: the caller's attributes, read once; NULL is refused.
        let a = unsafe { attr.as_ref() }.copied().ok_or(EINVAL)?;
        if a.cqe == 0
            || a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0
        {
            return Err(EINVAL);
        }
        let parent = if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0 {
            let pd = pd_of(a.parent_domain)?;
            if pd.pd.context != context_ || pd.inner.base().is_none() {
                return Err(EINVAL);
            }
            Some(pd.inner.clone())
        } else {
            None
        };
        let flags = if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 {
            a.flags
        } else {
            0
        };
        if flags & !(IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN) != 0 {
            return Err(EINVAL);
        }
        let offered = IBV_WC_STANDARD_FLAGS
            | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
            | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
        let wallclock = a.wc_flags & u64::from(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) != 0;
        let has_clock =
            || crate::ctx::context(context_).is_ok_and(|c| c.ctx.wallclock_ns(0).is_some());
        if flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN != 0
            || a.wc_flags & !u64::from(offered) != 0
            || (wallclock && !has_clock())
        {
            return Err(EOPNOTSUPP);
        }
        let cq = create(
            context_,
            a.cqe,
            a.cq_context,
            a.channel,
            a.comp_vector,
            parent,
            fill_ops,
        )?;
        Ok(cq.cast::<ibv_cq_ex>())
    })
}

fn fill_ops(cq: &mut ibv_cq_ex) {
    cq.start_poll = Some(start_poll);
    cq.next_poll = Some(next_poll);
    cq.end_poll = Some(end_poll);
    cq.read_opcode = Some(read_opcode);
    cq.read_vendor_err = Some(read_vendor_err);
    cq.read_byte_len = Some(read_byte_len);
    cq.read_imm_data = Some(read_imm_data);
    cq.read_qp_num = Some(read_qp_num);
    cq.read_src_qp = Some(read_src_qp);
    cq.read_wc_flags = Some(read_wc_flags);
    cq.read_slid = Some(read_slid);
    cq.read_sl = Some(read_sl);
    cq.read_dlid_path_bits = Some(read_dlid_path_bits);
    cq.read_completion_ts = Some(read_completion_ts);
    cq.read_completion_wallclock_ns = Some(read_completion_wallclock_ns);
}

fn cq_of<'a>(cq: *mut ibv_cq_ex) -> Result<&'a CCq, c_int> {
    handles::get::<CCq>(cq.cast::<ibv_cq>())
}

/// `ibv_start_poll`: steps to the first completion; ENOENT if there is
/// none (and then no `ibv_end_poll` follows).
unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    guard("ibv_start_poll", Conv::Errno, || {
        let c = cq_of(cq)?;
        // SAFETY: the caller's attributes; NULL is refused.
        let a = unsafe { attr.as_ref() }.ok_or(EINVAL)?;
        if a.comp_mask != 0 {
            return Err(EINVAL);
        }
        c.step()?;
        Ok(0)
    })
}

/// `ibv_next_poll`: steps to the next completion; ENOENT if there is none.
unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    guard("ibv_next_poll", Conv::Errno, || {
        cq_of(cq)?.step()?;
        Ok(0)
    })
}

/// `ibv_end_poll`: each step has already told the device how far the CQ
/// was read, so there is nothing left to do.
unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    guard("ibv_end_poll", Conv::Abort, || {
        cq_of(cq)?;
        Ok(())
    })
}

/// A field of the current completion; 0 for a handle that is not a CQ.
fn read<R: Default>(cq: *mut ibv_cq_ex, f: impl FnOnce(&Wc) -> R) -> R {
    cq_of(cq).map(|c| f(&c.current())).unwrap_or_default()
}

unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> ibv_wc_opcode {
    read(cq, |w| w.opcode as c_uint)
}

unsafe extern "C" fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| u32::from(w.vendor_err))
}

unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.byte_len)
}

/// In network order, as `ibv_wc.imm_data`.
unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.imm_data.unwrap_or(0).to_be())
}

unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.qp_num.get())
}

unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.src_qp)
}

unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> c_uint {
    read(cq, wc_flags)
}

/// RoCE has no LIDs.
unsafe extern "C" fn read_slid(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |_| 0)
}

/// The CQE's SL bits: for a UD receive, the RoCE packet type.
unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    read(cq, |w| w.sl)
}

unsafe extern "C" fn read_dlid_path_bits(cq: *mut ibv_cq_ex) -> u8 {
    read(cq, |_| 0)
}

/// Ticks of the device's clock (`hca_core_clock` kHz) when the device wrote
/// the completion.
unsafe extern "C" fn read_completion_ts(cq: *mut ibv_cq_ex) -> u64 {
    read(cq, |w| w.timestamp)
}

/// The same moment as wall-clock time, ns since the Unix epoch.
unsafe extern "C" fn read_completion_wallclock_ns(cq: *mut ibv_cq_ex) -> u64 {
    cq_of(cq)
        .ok()
        .and_then(|c| c.inner.context().wallclock_ns(c.current().timestamp))
        .unwrap_or(0)
}
