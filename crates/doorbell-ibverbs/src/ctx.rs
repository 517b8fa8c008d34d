//! An open context as this library keeps it: the C `verbs_context` (with
//! the `ibv_context` at its end) and the Rust objects behind it. Below both
//! `device` (which opens and queries contexts) and `objects` (which makes
//! things in them).

#![allow(unsafe_code)]

use core::ffi::c_int;

use doorbell_rt::ProcessNic;
use doorbell_verbs::Context;

use crate::abi::*;
use crate::events::{AsyncEvent, Dispatcher, Queue};
use crate::handles::{self, Handle, Kind};

/// An open context: the C `verbs_context` (with the `ibv_context` at its
/// end) first, then what it stands for.
#[repr(C)]
pub(crate) struct CContext {
    pub(crate) vctx: verbs_context,
    /// Stops (and is joined) first when the context is dropped.
    pub(crate) dispatcher: Option<Dispatcher>,
    pub(crate) ctx: Context,
    pub(crate) nic: ProcessNic,
    /// The context's async events (`async_fd` is its eventfd).
    pub(crate) async_events: Queue<AsyncEvent>,
}

// SAFETY: the C part is only raw pointers and plain data that this library
// writes before handing out the handle; the Rust part is Send + Sync.
unsafe impl Send for CContext {}
// SAFETY: as above.
unsafe impl Sync for CContext {}

// SAFETY: repr(C); `vctx.context` is at offset_of!(CContext, vctx) +
// offset_of!(verbs_context, context).
unsafe impl Handle for CContext {
    type C = ibv_context;
    const C_AT: usize =
        core::mem::offset_of!(CContext, vctx) + core::mem::offset_of!(verbs_context, context);
    const KIND: Kind = Kind::Context;
}

/// The context behind `c`.
pub(crate) fn context<'a>(c: *mut ibv_context) -> Result<&'a CContext, c_int> {
    handles::get::<CContext>(c)
}
