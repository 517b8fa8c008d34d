//! Completion channels as this library keeps them: the C struct (whose
//! `fd` is a real eventfd, readable while events wait) and the queue of
//! events behind it. Below the CQs of both kinds of context, which count
//! themselves on a channel, and the event routing, which fills it.

#![allow(unsafe_code)]

use core::cell::UnsafeCell;
use core::ffi::c_int;

use crate::abi::*;
use crate::events::Queue;
use crate::handle;
use crate::handles;

#[repr(C)]
pub(crate) struct CChannel {
    /// C reads `fd`; this library counts its CQs in `refcnt`.
    pub(crate) ch: UnsafeCell<ibv_comp_channel>,
    /// Completion events waiting: the C handle of each event's CQ.
    pub(crate) queue: Queue<usize>,
}

impl CChannel {
    pub(crate) fn get(&self) -> ibv_comp_channel {
        // SAFETY: a copy of plain data; writes happen through `refcnt`
        // below, under the rule that a channel is not destroyed in use.
        unsafe { self.ch.get().read() }
    }

    pub(crate) fn add_cq(&self, n: c_int) {
        // SAFETY: the cell's own pointer; C never writes refcnt.
        unsafe { (*self.ch.get()).refcnt += n };
    }
}
handle!(CChannel, ibv_comp_channel, ch, Channel);

/// One CQ more (`n` = 1) or fewer (-1) on `channel`, if it is one of this
/// library's channels: what `verbs_init_cq` and the destroy of a hosted
/// provider's CQ do.
pub(crate) fn channel_uses(channel: *mut ibv_comp_channel, n: c_int) {
    if let Ok(ch) = handles::get::<CChannel>(channel) {
        ch.add_cq(n);
    }
}

/// Drops the completion events of `cq` still queued on `channel`.
pub(crate) fn forget_events(channel: *mut ibv_comp_channel, cq: *mut ibv_cq) {
    if let Ok(ch) = handles::get::<CChannel>(channel) {
        ch.queue.remove(|&h| h == cq as usize);
    }
}
