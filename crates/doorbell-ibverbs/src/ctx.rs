//! An open context as this library keeps it: the C `verbs_context` (with
//! the `ibv_context` at its end) and the Rust objects behind it. Below both
//! `device` (which opens and queries contexts) and `objects` (which makes
//! things in them).

#![allow(unsafe_code)]

use core::ffi::c_int;
use std::sync::Mutex;

use doorbell_rt::ProcessNic;
use doorbell_verbs::Context;

use crate::abi::*;
use crate::handles::{self, Handle, Kind};

/// An open context: the C `verbs_context` (with the `ibv_context` at its
/// end) first, then what it stands for.
#[repr(C)]
pub(crate) struct CContext {
    pub(crate) vctx: verbs_context,
    pub(crate) ctx: Context,
    pub(crate) nic: ProcessNic,
    /// Completion events taken from the device for a channel other than
    /// the one being waited on.
    pub(crate) pending_events: Mutex<Vec<doorbell_types::Cqn>>,
    /// The C handle of each of this context's CQs, by CQ number.
    pub(crate) cqs: Mutex<std::collections::BTreeMap<doorbell_types::Cqn, usize>>,
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
