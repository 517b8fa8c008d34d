//! Where a context pointer or an event leads, whichever kind of context it
//! is: this library's own (`ctx`) or a hosted provider's
//! (`hosted::context`). Above both, and below the exports that take either.

#![allow(unsafe_code)]

use core::ffi::c_int;
use std::sync::Arc;

use doorbell_verbs::Context;

use crate::abi::*;
use crate::channel::CChannel;
use crate::ctx::CContext;
use crate::events::{AsyncEvent, Deliver};
use crate::handles;
use crate::hosted::context::HostedCtx;

/// A context of either kind: this library's own, or one a hosted provider
/// made (whose queries this library answers all the same).
pub(crate) enum AnyContext<'a> {
    Native(&'a CContext),
    Hosted(Arc<HostedCtx>),
}

impl AnyContext<'_> {
    /// The doorbell-side context that answers queries.
    pub(crate) fn ctx(&self) -> Result<&Context, c_int> {
        match self {
            Self::Native(c) => Ok(&c.ctx),
            Self::Hosted(h) => h.ctx(),
        }
    }
}

/// The context behind `c`, of either kind.
pub(crate) fn any_context<'a>(c: *mut ibv_context) -> Result<AnyContext<'a>, c_int> {
    match crate::hosted::context::context(c) {
        Some(h) => Ok(AnyContext::Hosted(h)),
        None => crate::ctx::context(c).map(AnyContext::Native),
    }
}

/// Delivers routed events to the handles they belong to.
pub(crate) struct Handles;

impl Deliver for Handles {
    fn completion(&self, channel: usize, cq: usize, _cqn: doorbell_types::Cqn) {
        if let Ok(ch) = handles::get::<CChannel>(channel as *mut ibv_comp_channel) {
            ch.queue.push(cq);
        }
    }

    fn async_event(&self, ctx: usize, event: AsyncEvent) {
        match any_context(ctx as *mut ibv_context) {
            Ok(AnyContext::Native(c)) => c.async_events.push(event),
            Ok(AnyContext::Hosted(h)) => h.async_events.push(event),
            Err(_) => {}
        }
    }
}
